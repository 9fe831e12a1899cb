"""What the tests share besides fixtures (those are in tests/conftest.py): the one span reader (traces),
a real Prometheus (prom), a protocol-level OTLP receiver, subprocess and real-verl demo runs, ... Test modules
import ``from helpers.X import ...`` (tests/ is on sys.path: pytest puts it there, and so does Python for the
``tests/drive_*.py`` scripts it runs)."""
