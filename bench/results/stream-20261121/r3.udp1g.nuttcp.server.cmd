nuttcp -1 --nofork -P 24444 -p 24445
