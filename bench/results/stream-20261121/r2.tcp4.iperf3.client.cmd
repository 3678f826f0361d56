iperf3 -c 127.0.0.1 -p 24260 -t 5 -J -P 4
