"""One core's worth of other work (an editor, a browser tab, a build): a pure-Python busy loop."""
import time

end = time.time() + float(__import__("sys").argv[1])
x = 0
while time.time() < end:
    x += 1
