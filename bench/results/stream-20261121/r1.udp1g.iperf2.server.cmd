iperf -s -u -p 24212 -y C
