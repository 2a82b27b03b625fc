# Does GPU work in this process slow host I/O (direct disk reads, Redis GETs over loopback)?
# Modes: idle GPU; matmuls synchronised by spinning (default); matmuls with blocking events.
import subprocess, sys, threading, time, os
import torch
mode = sys.argv[1]; what = sys.argv[2]; C = sys.argv[3]; T = sys.argv[4]
stop = False
def gpu():
    a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
    ev = torch.cuda.Event(blocking=(mode == 'block'))
    while not stop:
        for _ in range(20): c = a @ b
        ev.record(); ev.synchronize()
t = None
if mode != 'idle':
    t = threading.Thread(target=gpu); t.start(); time.sleep(1)
env = dict(os.environ, LD_LIBRARY_PATH=C + '/redis/lib')
s = time.time()
if what == 'disk':
    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches; for i in 0 1 2 3 4 5 6 7; do dd if=%s/raw of=/dev/null bs=2M count=256 skip=$((i*256)) iflag=direct 2>/dev/null & done; wait" % T, shell=True)
    e = time.time(); print(mode, what, round(4294967296 / (e - s) / 1e9, 2), 'GB/s', flush=True)
else:
    out = subprocess.run([C + '/redis/bin/redis-benchmark', '-p', '6390', '-t', 'get', '-d', '2097152', '-n', '1500', '-c', '4', '-r', '1000', '-q'], env=env, capture_output=True, text=True).stdout
    print(mode, what, out.replace('\r', '\n').strip().splitlines()[-1], flush=True)
stop = True
if t: t.join()
