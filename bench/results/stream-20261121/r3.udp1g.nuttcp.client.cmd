nuttcp -T 5 -fparse -P 24444 -p 24445 -u -R 1g -l 1472 127.0.0.1
