nuttcp -T 5 -fparse -P 24244 -p 24245 127.0.0.1
