"""Throwaway local registries and sample images: the demo, and the test suite's fixtures."""
