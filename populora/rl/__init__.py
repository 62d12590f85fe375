"""populora.rl"""
