"""Tests of dprag_core.mechanisms."""
