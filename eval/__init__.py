"""PopuLoRA evaluation suite.

pass@1 (greedy by default; or sampled, with pass@1..N and avg@N) of every adapter of one or more runs
(population members and the single-agent baseline) and of the bare base model, on three code
benchmarks (HumanEval+, MBPP+, LiveCodeBench) and seven math benchmarks (AIME 24/25, AMC 23, MATH-500,
Minerva, GSM8K, OlympiadBench), reported as leaderboards: per run, across seeds with intervals, as
paired differences from the baseline, and as pass@k curves.

Modules:

- ``benchmarks``     the benchmark registry (``BenchmarkSpec`` per benchmark) and loaders, checksums
- ``families``       the ``BenchmarkFamily`` interface (prompt, stops, extraction, scorer) and its registry
- ``settings``       ``EvalSettings``, the one settings record of an evaluation
- ``decoding``       ``Decoding``: greedy or N seeded samples per item (temperature, top-p, seed)
- ``engine``         ``make_engine``: the generation engine with every adapter (rank from the adapters)
- ``prompts``        templates (base / chat / r1), stop strings, template-level extraction
- ``evalplus``       the EvalPlus family: program preparation, EvalPlus scoring (subprocess)
- ``livecodebench``  the LiveCodeBench family: loader (safe private-test decoding), LCB extraction, scorer
- ``lcb_harness``    LCB's test procedure, run inside the sandbox (one process per candidate and problem)
- ``math_answers``   the math family: answer equivalence with ``math-verify``
- ``runs``           the run layout reader (which adapters a run has, its training state)
- ``generate``       multi-adapter generation in one engine, resumable JSONL store, shards, merge
- ``pipeline``       generation -> merge -> scoring -> per-run score files with provenance
- ``samples``        scoring samples made elsewhere (``populora score``) through the same path
- ``lm_eval_model``  an lm-eval ``LM`` answering through the multi-adapter engine; ``tasks/`` YAMLs
- ``stats``          pure statistics: pass@k (unbiased estimator), t intervals across seeds, paired bootstrap
- ``columns``        the leaderboard's columns and group averages
- ``seeds``          configuration and seed of each run, across-seed tables
- ``paired``         population configurations vs the baseline on the same items
- ``passk``          pass@k curves per benchmark family
- ``labels``         what every table states: decoding, seeds, benchmark versions and items, LCB window
- ``claims``         the across-seed, paired and pass@k sections in Markdown, HTML, CSV and JSON
- ``figures``        the small-multiples chart, pass@k figures (matplotlib) and the forest plot (SVG)
- ``leaderboard``    Markdown / CSV / HTML leaderboards: the claims, the per-run table, the provenance
"""
