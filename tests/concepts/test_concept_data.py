import numpy as np
from pgmpy.inference import VariableElimination

from fedpgm.concepts.data import bayes_task_accuracy, make_concept_data
from fedpgm.data.bayesnet import read_network


def test_bayes_ceiling_equals_exact_inference_given_every_concept():
    data = make_concept_data("asia", rows=1500, seed=1)
    rows = data.part(2)
    infer = VariableElimination(read_network("asia"))
    hits = 0
    for r in rows:
        evidence = {n: data.states[n][data.codes[r, i]] for i, n in enumerate(data.nodes) if n != data.task}
        posterior = infer.query([data.task], evidence=evidence, show_progress=False)
        best = posterior.state_names[data.task][int(np.argmax(posterior.values))]
        hits += best == data.states[data.task][data.codes[r, -1]]
    ceiling = bayes_task_accuracy(data)
    print(f"asia Bayes-optimal task accuracy given all concepts: {ceiling:.4f} on {len(rows)} rows")
    assert ceiling == hits / len(rows)
    majority = np.bincount(data.codes[rows, -1]).max() / len(rows)
    assert ceiling > majority + 0.2  # dysp given its Markov blanket: far above the majority class
