nuttcp -T 5 -fparse -P 24220 -p 24221 -u -R 1g -l 1472 127.0.0.1
