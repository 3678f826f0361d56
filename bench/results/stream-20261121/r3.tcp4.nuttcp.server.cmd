nuttcp -1 --nofork -P 24388 -p 24389
