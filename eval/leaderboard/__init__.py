"""The leaderboard: seeds, statistics, paired comparisons, pass@k, figures, labels, the page."""
