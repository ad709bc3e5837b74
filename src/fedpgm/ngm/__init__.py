"""Federated neural graphical models (FedNGM): NGMs on mixed data, graph recovery, merged
dependency graphs, global NGMs distilled from client samples, and stitching of client-only
features."""
