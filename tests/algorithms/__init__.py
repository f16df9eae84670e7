"""Tests of dprag_core.algorithms."""
