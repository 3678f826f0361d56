iperf3 -c 127.0.0.1 -p 24316 -t 5 -J -u -b 1G -l 1472
