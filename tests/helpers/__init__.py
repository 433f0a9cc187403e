"""Code the tests share that is not a fixture: assertions, service starters, verl harnesses and
builders, one module per thing, each imported by name (`from tests.helpers.refusals import ...`).
Fixtures live in the conftest.py files; nothing here is collected as a test (no `test_*.py`), and no
test imports another test module, a private name or a fixture (tests/test_test_layout.py)."""
