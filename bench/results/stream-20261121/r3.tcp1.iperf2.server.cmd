iperf -s -p 24348 -y C
