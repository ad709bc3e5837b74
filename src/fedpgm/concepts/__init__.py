"""Federated concept-based models (F-CMs): concept data from Bayesian networks, concept models
(CBM, CEM, CGM, C2BM, opaque) whose concept set and graph grow as clients join, graph aggregation,
module-wise FedAvg, interventions and DP-SGD client updates."""
