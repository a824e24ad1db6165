"""Turning files into documents and chunks."""
