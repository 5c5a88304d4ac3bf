import sys

from minisci.profiles import main

sys.exit(main())
