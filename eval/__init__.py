"""PopuLoRA evaluation suite.

Greedy pass@1 of every adapter of one or more runs (population members and the single-agent
baseline) and of the bare base model, on three code benchmarks (HumanEval+, MBPP+, LiveCodeBench)
and seven math benchmarks (AIME 24/25, AMC 23, MATH-500, Minerva, GSM8K, OlympiadBench), reported
as leaderboards.

Modules:

- ``benchmarks``     the benchmark registry and loaders (EvalPlus, math sets), checksums, data dir
- ``livecodebench``  LiveCodeBench ``code_generation_lite`` loader (safe private-test decoding)
- ``prompts``        prompt templates (base / chat / r1) per benchmark kind
- ``math_answers``   gold answers per math set, answer equivalence with ``math-verify``
- ``runs``           the run layout reader (which adapters a run has)
- ``generate``       multi-adapter generation in one engine, resumable JSONL store, shards, merge
- ``score_code``     EvalPlus scoring (subprocess) and the LiveCodeBench scorer (project sandbox)
- ``lm_eval_model``  an lm-eval ``LM`` answering through the multi-adapter engine; ``tasks/`` YAMLs
- ``pipeline``       generation -> merge -> scoring -> per-run score files
- ``leaderboard``    Markdown / CSV / HTML leaderboards with a bar chart
"""
