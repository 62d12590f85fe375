"""populora.population"""
