import sys

from src.evaluate.cli import main

sys.exit(main())
