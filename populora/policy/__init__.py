"""populora.policy"""
