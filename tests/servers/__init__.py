"""Real servers the team-store tests run against, started on loopback by the tests.

Each module is a pytest plugin (``tests/conftest.py`` lists them in
``pytest_plugins``): ``postgres`` (Debian's PostgreSQL, initdb + pg_ctl in a
temporary directory), ``s3`` (moto's S3 server). No mocks: the team index and
blob store are tested through the same client code a real deployment uses.
"""
