"""Running an evaluation: from run directories and benchmarks to score files.

- ``settings``       ``EvalSettings``, the one settings record of an evaluation
- ``decoding``       ``Decoding``: greedy or N seeded samples per item (temperature, top-p, seed)
- ``engine``         ``make_engine``: the generation engine with every adapter (rank from the adapters)
- ``runs``           the run layout reader (which adapters a run has, its training state)
- ``generate``       multi-adapter generation in one engine, resumable JSONL store, shards, merge
- ``pipeline``       generation -> merge -> scoring -> per-run score files with provenance
- ``samples``        scoring samples made elsewhere (``populora score``) through the same path
- ``score_table``    the table ``populora eval`` prints when it has scored
- ``lm_eval_model``  an lm-eval ``LM`` answering through the multi-adapter engine (``eval/tasks/`` YAMLs)
"""
