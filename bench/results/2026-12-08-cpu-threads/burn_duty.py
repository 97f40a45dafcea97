"""Part of a core's worth of other work: busy for DUTY of every 10 ms, asleep the rest.
Usage: python burn_duty.py SECONDS DUTY   (DUTY in (0, 1]; 1 is burn.py's busy loop)"""
import sys
import time

seconds, duty = float(sys.argv[1]), float(sys.argv[2])
end = time.time() + seconds
period = 0.010
while time.time() < end:
    start = time.perf_counter()
    while time.perf_counter() - start < period * duty:
        pass
    time.sleep(period * (1 - duty))
