iperf3 -s -1 -p 24116
