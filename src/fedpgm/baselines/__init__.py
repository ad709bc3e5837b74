"""Neural federated baselines run through fedpgm's runtime, with their measured bytes:
FedAvg of an MLP (horizontal) and SplitNN with an MLP per client (vertical)."""
