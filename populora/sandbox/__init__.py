"""populora.sandbox"""
