"""The population: who plays whom, who is doing well, and how the weakest are replaced.

Submodules (pure library code, independent of any backend):

- ``members``: ``Member`` records, founders, the JSON-lines lineage log;
- ``ratings``: TrueSkill ratings, win probability, conservative score, the games that rate each
  role on its own RL reward;
- ``matchmaking``: prioritized fictitious self-play (PFSP) pairing of teachers and students;
- ``svd``: the cheap SVD of a LoRA delta and recomposition into LoRA factors;
- ``operators``: the registry of LoRA weight-space mutation and crossover operators;
- ``evolution``: ``pbt_step``, PBT replacement of the weakest members by children made with the
  operators.

Import the submodules directly (``from populora.population import ratings``); this package
imports nothing itself, so the light modules (ratings, matchmaking, members) do not pull in torch.
"""
