"""Scheduling passes at Tile IR."""
