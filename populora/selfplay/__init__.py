"""populora.selfplay"""
