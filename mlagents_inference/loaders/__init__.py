"""loaders"""
