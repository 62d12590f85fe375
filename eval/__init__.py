"""PopuLoRA evaluation suite.

pass@1 (greedy by default; or sampled, with pass@1..N and avg@N) of every adapter of one or more runs
(population members and the single-agent baseline) and of the bare base model, on three code
benchmarks (HumanEval+, MBPP+, LiveCodeBench) and seven math benchmarks (AIME 24/25, AMC 23, MATH-500,
Minerva, GSM8K, OlympiadBench), reported as leaderboards: per run, across seeds with intervals, as
paired differences from the baseline, and as pass@k curves.

Three parts, in the order the data flows (each a room of docs/architecture.md: a part imports only
the parts above it):

- ``benchmarks/``  what is evaluated: the registry (``BenchmarkSpec`` per benchmark, loaders,
  checksums, the shipped test sets in ``data/``) and the benchmark families, one module each
  (``evalplus``, ``livecodebench`` with ``lcb_harness``, ``math_answers``), behind the interface of
  ``families`` (prompt, stop strings, extraction, scorer); ``prompts``: templates and stop strings;
- ``runner/``      running an evaluation: ``settings`` and ``decoding``, ``engine`` (one engine for
  every adapter), ``runs`` (which adapters a run has), ``generate`` (resumable, sharded generation),
  ``pipeline`` (generation -> merge -> scoring -> score files with provenance), ``samples`` (scoring
  outputs made elsewhere: ``populora score``), ``score_table``, ``lm_eval_model`` (with ``tasks/``);
- ``leaderboard/`` reading score files back: ``seeds`` (configuration and seed of each run),
  ``columns``, ``paired`` (each population configuration against the baseline), ``passk``
  (curves), ``labels`` (what every table states), ``claims`` and ``figures`` (the statistical
  sections), ``page`` (the Markdown / CSV / HTML files), ``calibration`` (the paired comparison's
  false-positive rate and power, by simulation).

``stats`` holds the statistics the runner and the leaderboard share: pass@k, the Wilson and t
intervals, and the paired comparison of two configurations (``paired_test``).
"""
