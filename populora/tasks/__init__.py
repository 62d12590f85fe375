"""populora.tasks"""
