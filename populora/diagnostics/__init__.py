"""populora.diagnostics"""
