nuttcp -T 5 -fparse -P 24332 -p 24333 -u -R 1g -l 1472 127.0.0.1
