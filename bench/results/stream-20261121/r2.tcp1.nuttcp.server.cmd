nuttcp -1 --nofork -P 24244 -p 24245
