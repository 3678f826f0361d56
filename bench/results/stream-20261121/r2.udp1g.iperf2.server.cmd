iperf -s -u -p 24324 -y C
