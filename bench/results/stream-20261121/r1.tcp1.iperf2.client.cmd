iperf -c 127.0.0.1 -p 24124 -t 5 -y C
