iperf -s -p 24236 -y C
