"""Helpers shared by the test suites: in-memory fakes for unit tests of pure logic, and the
helpers integration and Airflow tests use to set up real services (topics, data, the REST client)."""
