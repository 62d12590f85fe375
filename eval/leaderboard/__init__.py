"""The leaderboard: score files of runs read back as the tables and figures a paper quotes.

- ``columns``      the leaderboard's columns and group averages
- ``seeds``        configuration and seed of each run, across-seed tables
- ``paired``       population configurations vs the baseline on the same items (``eval.stats.paired_test``)
- ``passk``        pass@k curves per benchmark family
- ``labels``       what every table states: decoding, seeds, benchmark versions and items, LCB window
- ``claims``       the across-seed, paired and pass@k sections in Markdown, HTML, CSV and JSON
- ``figures``      the small-multiples chart, pass@k figures (matplotlib) and the forest plot (SVG)
- ``page``         Markdown / CSV / HTML leaderboards: the claims, the per-run table, the provenance
- ``calibration``  the paired comparison's false-positive rate and power in simulated worlds
  (``python -m eval.leaderboard.calibration``)
"""
