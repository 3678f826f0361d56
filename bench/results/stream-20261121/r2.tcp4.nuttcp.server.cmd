nuttcp -1 --nofork -P 24276 -p 24277
