"""populora.bench"""
