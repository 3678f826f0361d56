iperf -s -p 24124 -y C
