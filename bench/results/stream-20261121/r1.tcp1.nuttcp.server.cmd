nuttcp -1 --nofork -P 24132 -p 24133
