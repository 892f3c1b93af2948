import sys

from quotagate.cli import main

sys.exit(main())
