iperf3 -c 127.0.0.1 -p 24188 -t 5 -J -Z
