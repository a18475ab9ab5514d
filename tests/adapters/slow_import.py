"""A module whose import takes longer than a fork server is given to come up."""

import time

time.sleep(30)
