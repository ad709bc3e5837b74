"""Output folders and files: nothing a user owns is deleted unasked, nothing is half-written."""

import pytest

from fedpgm.errors import FedpgmError
from fedpgm.files import atomic_folder, check_output_file, check_output_folder, replacing, write_json


def test_atomic_folder_refuses_a_non_empty_folder_and_keeps_it(tmp_path):
    out = tmp_path / "models"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(FedpgmError, match=r"already exists and holds \['thesis.tex'\], which this save would delete.*--force"):
        with atomic_folder(out) as tmp:
            (tmp / "model.json").write_text("{}")
    assert (out / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]  # no temporary folder left


def test_atomic_folder_replaces_only_when_allowed(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "old.json").write_text("old")
    with replacing(out):
        with atomic_folder(out) as tmp:
            (tmp / "new.json").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["new.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    with pytest.raises(FedpgmError, match="holds"):  # the permission ended with the block
        with atomic_folder(out) as tmp:
            (tmp / "other.json").write_text("x")
    with atomic_folder(out) as tmp:  # a save of the same files replaces its earlier self
        (tmp / "new.json").write_text("newer")
    assert (out / "new.json").read_text() == "newer"


def test_empty_or_new_folders_are_written_and_a_failure_leaves_the_old_one(tmp_path):
    (tmp_path / "empty").mkdir()
    with atomic_folder(tmp_path / "empty") as tmp:
        (tmp / "a").write_text("1")
    assert (tmp_path / "empty" / "a").read_text() == "1"
    with replacing(tmp_path / "empty"):
        with pytest.raises(RuntimeError):
            with atomic_folder(tmp_path / "empty") as tmp:
                (tmp / "b").write_text("half")
                raise RuntimeError("interrupted")
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_a_file_is_never_replaced_by_a_folder(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(FedpgmError, match="is a file"):
        with replacing(f), atomic_folder(f):
            pass
    assert f.read_text() == "mine"


def test_output_checks_name_the_option_and_the_fix(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FedpgmError, match="--out .*full already exists and is not empty; choose a new folder "
                                          "or pass --force"):
        check_output_folder(tmp_path / "full")
    check_output_folder(tmp_path / "full", force=True)
    check_output_folder(tmp_path / "new" / "deeper")
    with pytest.raises(FedpgmError, match="--out .*file is a file"):
        check_output_folder(tmp_path / "file", force=True)
    with pytest.raises(FedpgmError, match="--json .*full is a folder; name a file"):
        check_output_file(tmp_path / "full")
    with pytest.raises(FedpgmError, match="--json .*cannot write in .*file"):
        check_output_file(tmp_path / "file" / "r.json")
    write_json({"a": 1.5}, tmp_path / "new" / "r.json")
    assert (tmp_path / "new" / "r.json").read_text() == '{\n "a": 1.5\n}\n'
