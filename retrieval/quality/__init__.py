"""Retrieval quality for staff: glossary candidates, evaluation cases and runs, the chart."""
