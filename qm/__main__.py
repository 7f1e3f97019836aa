import sys

from qm.cli import main

sys.exit(main())
