"""Example transforms used by the demo pipeline and the tests."""
