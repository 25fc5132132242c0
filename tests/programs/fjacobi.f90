! Jacobi iterations for the Poisson equation on an n x n grid, on the device in Fortran: the
! grids stay on the device (target enter data), each sweep is a target parallel do, and
! every few sweeps the residual is computed there with a reduction and read back. The same
! iterations run on the host alongside: the residuals and the final grid must agree.
program fjacobi
  use omp_lib
  implicit none
  integer :: n, steps, every, it, i, j, bad
  real(8), allocatable :: u(:,:), unew(:,:), f(:,:), hu(:,:), hnew(:,:)
  real(8) :: res, hres, h2, diff
  character(len=32) :: arg
  n = 96
  steps = 60
  every = 10
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) steps
  end if
  if (command_argument_count() >= 3) then
    call get_command_argument(3, arg)
    read (arg, *) every
  end if
  if (omp_get_num_devices() < 1) then
    print '(a)', 'fjacobi: no device'
    stop 3
  end if
  allocate (u(n, n), unew(n, n), f(n, n), hu(n, n), hnew(n, n))
  h2 = 1d0 / dble((n - 1) * (n - 1))
  do j = 1, n
    do i = 1, n
      f(i, j) = dble(mod(i * 3 + j * 5, 17)) - 8d0
      u(i, j) = 0d0
    end do
  end do
  hu = u
  unew = u
  hnew = u
  bad = 0
  !$omp target enter data map(to: u, unew, f)
  do it = 1, steps
    !$omp target parallel do private(i)
    do j = 2, n - 1
      do i = 2, n - 1
        unew(i, j) = 0.25d0 * (u(i - 1, j) + u(i + 1, j) + u(i, j - 1) + u(i, j + 1) - h2 * f(i, j))
      end do
    end do
    !$omp target parallel do private(i)
    do j = 2, n - 1
      do i = 2, n - 1
        u(i, j) = unew(i, j)
      end do
    end do
    do j = 2, n - 1
      do i = 2, n - 1
        hnew(i, j) = 0.25d0 * (hu(i - 1, j) + hu(i + 1, j) + hu(i, j - 1) + hu(i, j + 1) - h2 * f(i, j))
      end do
    end do
    hu(2:n-1, 2:n-1) = hnew(2:n-1, 2:n-1)
    if (mod(it, every) == 0) then
      res = 0d0
      !$omp target parallel do private(i) reduction(+: res) map(tofrom: res)
      do j = 2, n - 1
        do i = 2, n - 1
          res = res + (u(i - 1, j) + u(i + 1, j) + u(i, j - 1) + u(i, j + 1) - 4d0 * u(i, j) - h2 * f(i, j))**2
        end do
      end do
      hres = 0d0
      do j = 2, n - 1
        do i = 2, n - 1
          hres = hres + (hu(i - 1, j) + hu(i + 1, j) + hu(i, j - 1) + hu(i, j + 1) - 4d0 * hu(i, j) - h2 * f(i, j))**2
        end do
      end do
      if (abs(res - hres) > 1d-9 * hres) bad = bad + 1
      print '(a, i0, a, es10.3)', 'fjacobi step ', it, ': residual ', sqrt(hres)
    end if
  end do
  !$omp target exit data map(from: u) map(release: unew, f)
  diff = maxval(abs(u - hu))
  if (diff > 1d-12) bad = bad + 1
  if (bad == 0) then
    print '(a, i0, a, i0, a)', 'fjacobi n=', n, ' steps=', steps, ': PASS'
  else
    print '(a, i0, a, es10.3)', 'fjacobi: FAIL, ', bad, ' residuals or grid wrong, max difference ', diff
    stop 1
  end if
end program
