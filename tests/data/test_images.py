"""Images as tables: IDX files, the MNIST loaders, splits by image region, hidden pixels."""

import numpy as np
import pytest

from fedpgm.data import load_dataset, partition
from fedpgm.data.images import hide_pixels, layout, levels, read_idx, region_groups
from fedpgm.errors import FedpgmError


@pytest.mark.parametrize("zipped", [True, False])
def test_mnist_folder_reads_idx_exactly(tmp_path, zipped, write_mnist):
    data = write_mnist(tmp_path / "m", zipped=zipped)
    ds = load_dataset(f"mnist:{tmp_path / 'm'}")
    assert ds.train.shape == (30, 21) and ds.test.shape == (10, 21) and ds.schema.label == "target"
    assert layout(ds.schema)[0] == (4, 5) and levels(ds.schema) == 256
    np.testing.assert_array_equal(ds.train[[f"pixel_{r}_{c}" for r in range(4) for c in range(5)]].to_numpy(),
                                  data["train"][0].reshape(30, -1))
    np.testing.assert_array_equal(ds.test["target"].to_numpy(), data["t10k"][1])
    assert len(load_dataset(f"mnist:{tmp_path / 'm'}", rows=7).train) == 7


def test_idx_errors(tmp_path, idx_bytes):
    good = idx_bytes(np.zeros((3, 2, 2)), 0x803)
    (tmp_path / "a").write_bytes(good[:-1])
    with pytest.raises(FedpgmError, match="truncated or corrupt"):
        read_idx(tmp_path / "a", 0x803)
    (tmp_path / "b").write_bytes(idx_bytes(np.zeros(3), 0x801))
    with pytest.raises(FedpgmError, match="magic number 0x801, expected 0x803"):
        read_idx(tmp_path / "b", 0x803)
    (tmp_path / "c").write_bytes(b"\x00\x00")
    with pytest.raises(FedpgmError, match="not an IDX file"):
        read_idx(tmp_path / "c", 0x803)
    with pytest.raises(FedpgmError, match="has no train-images-idx3-ubyte"):
        load_dataset(f"mnist:{tmp_path}")


def test_mnist5k_when_present():
    try:
        ds = load_dataset("mnist5k")
    except FedpgmError as e:
        pytest.skip(f"../shared/data/mnist5k is absent here ({e})")
    assert ds.train.shape == (4000, 785) and ds.test.shape == (1000, 785)
    assert (ds.train["target"].value_counts() == 400).all()


def test_pixel_values_are_checked():
    digits = load_dataset("digits")
    frame = digits.train.copy()
    frame.iloc[0, 5] = 17
    with pytest.raises(FedpgmError, match="outside 0..16"):
        digits.schema.validate_frame(frame)
    from fedpgm.data.schema import Feature, Schema
    schema = Schema((Feature("pixel_0_0", "continuous"), Feature("pixel_0_1", "continuous")), pixel_levels=256)
    import pandas as pd
    with pytest.raises(FedpgmError, match="holds 256.0, outside the integers 0..255"):
        schema.validate_frame(pd.DataFrame({"pixel_0_0": [3.0], "pixel_0_1": [256.0]}))
    assert Schema.from_dict(schema.to_dict()).pixel_levels == 256


def test_region_splits_and_hidden_pixels():
    digits = load_dataset("digits")
    halves = region_groups(digits.schema, "halves")
    assert [len(g) for g in halves] == [32, 32] and "pixel_7_3" in halves[0] and "pixel_0_4" in halves[1]
    quads = region_groups(digits.schema, "quadrants")
    assert [len(g) for g in quads] == [16] * 4 and set().union(*quads) == set(digits.schema.feature_names)
    banded = region_groups(digits.schema, "halves", band=1)
    assert [len(g) for g in banded] == [40, 40] and len(set(banded[0]) & set(banded[1])) == 16
    with pytest.raises(FedpgmError, match="does not fit"):
        region_groups(digits.schema, "halves", band=4)
    part = partition(digits, "vertical", 4, regions="quadrants")
    assert [layout(c.schema.select(c.schema.feature_names))[0] for c in part.clients] == [(4, 4)] * 4
    hyb = partition(digits, "hybrid", 2, regions="halves", band=1).drop_label()
    assert hyb.params["shared_columns"] == [f"pixel_{r}_{c}" for r in range(8) for c in (3, 4)]
    assert all(c.schema.label is None and "target" not in c.train for c in hyb.clients)
    with pytest.raises(FedpgmError, match="use --clients 2"):
        partition(digits, "vertical", 3, regions="halves")
    x = digits.test[digits.schema.names].to_numpy()[:2]
    hidden = hide_pixels(x, digits.schema, "bottom")
    assert np.isnan(hidden[:, digits.schema.index("pixel_4_0")]).all()
    assert not np.isnan(hidden[:, digits.schema.index("pixel_3_7")]).any()
    assert not np.isnan(hidden[:, digits.schema.index("target")]).any()
