// geometry.cpp - 3D vector math, axis-aligned bounding boxes and ray casting
// for a small software renderer / picking tool.

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <vector>

namespace geo {

constexpr double kEpsilon = 1e-9;

struct Vec3 {
    double x = 0.0, y = 0.0, z = 0.0;

    constexpr Vec3() = default;
    constexpr Vec3(double x_, double y_, double z_) : x(x_), y(y_), z(z_) {}

    constexpr Vec3 operator+(const Vec3& o) const { return {x + o.x, y + o.y, z + o.z}; }
    constexpr Vec3 operator-(const Vec3& o) const { return {x - o.x, y - o.y, z - o.z}; }
    constexpr Vec3 operator*(double s) const { return {x * s, y * s, z * s}; }
    constexpr Vec3 operator/(double s) const { return {x / s, y / s, z / s}; }
    constexpr Vec3 operator-() const { return {-x, -y, -z}; }

    Vec3& operator+=(const Vec3& o) {
        x += o.x;
        y += o.y;
        z += o.z;
        return *this;
    }

    double operator[](int axis) const {
        switch (axis) {
            case 0: return x;
            case 1: return y;
            case 2: return z;
            default: throw std::out_of_range("Vec3 axis must be 0, 1 or 2");
        }
    }

    constexpr double dot(const Vec3& o) const { return x * o.x + y * o.y + z * o.z; }

    constexpr Vec3 cross(const Vec3& o) const {
        return {y * o.z - z * o.y, z * o.x - x * o.z, x * o.y - y * o.x};
    }

    double length() const { return std::sqrt(dot(*this)); }

    Vec3 normalized() const {
        const double len = length();
        if (len < kEpsilon) {
            throw std::domain_error("cannot normalize a zero-length vector");
        }
        return *this / len;
    }
};

inline Vec3 operator*(double s, const Vec3& v) { return v * s; }

inline std::ostream& operator<<(std::ostream& os, const Vec3& v) {
    return os << '(' << v.x << ", " << v.y << ", " << v.z << ')';
}

inline Vec3 min(const Vec3& a, const Vec3& b) {
    return {std::min(a.x, b.x), std::min(a.y, b.y), std::min(a.z, b.z)};
}

inline Vec3 max(const Vec3& a, const Vec3& b) {
    return {std::max(a.x, b.x), std::max(a.y, b.y), std::max(a.z, b.z)};
}

struct Ray {
    Vec3 origin;
    Vec3 direction;  // expected to be normalized

    Vec3 at(double t) const { return origin + direction * t; }
};

class Aabb {
public:
    Aabb() : lo_(kInf, kInf, kInf), hi_(-kInf, -kInf, -kInf) {}
    Aabb(const Vec3& lo, const Vec3& hi) : lo_(min(lo, hi)), hi_(max(lo, hi)) {}

    static Aabb around(const std::vector<Vec3>& points) {
        Aabb box;
        for (const auto& p : points) {
            box.expand(p);
        }
        return box;
    }

    bool empty() const { return lo_.x > hi_.x; }
    const Vec3& lo() const { return lo_; }
    const Vec3& hi() const { return hi_; }
    Vec3 center() const { return (lo_ + hi_) * 0.5; }
    Vec3 extent() const { return empty() ? Vec3{} : hi_ - lo_; }

    void expand(const Vec3& p) {
        lo_ = min(lo_, p);
        hi_ = max(hi_, p);
    }

    bool contains(const Vec3& p) const {
        return p.x >= lo_.x && p.x <= hi_.x && p.y >= lo_.y && p.y <= hi_.y &&
               p.z >= lo_.z && p.z <= hi_.z;
    }

    bool overlaps(const Aabb& other) const {
        for (int axis = 0; axis < 3; ++axis) {
            if (hi_[axis] < other.lo_[axis] || other.hi_[axis] < lo_[axis]) {
                return false;
            }
        }
        return true;
    }

    // Slab test: returns the entry distance along the ray, if it hits.
    std::optional<double> intersect(const Ray& ray, double t_max = kInf) const {
        double t_near = 0.0;
        double t_far = t_max;
        for (int axis = 0; axis < 3; ++axis) {
            const double origin = ray.origin[axis];
            const double dir = ray.direction[axis];
            if (std::abs(dir) < kEpsilon) {
                if (origin < lo_[axis] || origin > hi_[axis]) {
                    return std::nullopt;
                }
                continue;
            }
            double t0 = (lo_[axis] - origin) / dir;
            double t1 = (hi_[axis] - origin) / dir;
            if (t0 > t1) {
                std::swap(t0, t1);
            }
            t_near = std::max(t_near, t0);
            t_far = std::min(t_far, t1);
            if (t_near > t_far) {
                return std::nullopt;
            }
        }
        return t_near;
    }

private:
    static constexpr double kInf = std::numeric_limits<double>::infinity();
    Vec3 lo_;
    Vec3 hi_;
};

struct Triangle {
    std::array<Vec3, 3> v;

    Vec3 normal() const { return (v[1] - v[0]).cross(v[2] - v[0]).normalized(); }
    double area() const { return 0.5 * (v[1] - v[0]).cross(v[2] - v[0]).length(); }
    Aabb bounds() const { return Aabb::around({v[0], v[1], v[2]}); }

    // Moller-Trumbore ray/triangle intersection.
    std::optional<double> intersect(const Ray& ray) const {
        const Vec3 edge1 = v[1] - v[0];
        const Vec3 edge2 = v[2] - v[0];
        const Vec3 p = ray.direction.cross(edge2);
        const double det = edge1.dot(p);
        if (std::abs(det) < kEpsilon) {
            return std::nullopt;  // ray parallel to the triangle
        }
        const double inv_det = 1.0 / det;
        const Vec3 s = ray.origin - v[0];
        const double u = s.dot(p) * inv_det;
        if (u < 0.0 || u > 1.0) {
            return std::nullopt;
        }
        const Vec3 q = s.cross(edge1);
        const double w = ray.direction.dot(q) * inv_det;
        if (w < 0.0 || u + w > 1.0) {
            return std::nullopt;
        }
        const double t = edge2.dot(q) * inv_det;
        return t > kEpsilon ? std::optional<double>(t) : std::nullopt;
    }
};

// Returns the index of the closest triangle hit by the ray, testing bounds first.
std::optional<std::size_t> pick(const std::vector<Triangle>& mesh, const Ray& ray) {
    std::optional<std::size_t> best;
    double best_t = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < mesh.size(); ++i) {
        if (!mesh[i].bounds().intersect(ray, best_t)) {
            continue;
        }
        if (auto t = mesh[i].intersect(ray); t && *t < best_t) {
            best_t = *t;
            best = i;
        }
    }
    return best;
}

}  // namespace geo

int main() {
    using geo::Vec3;
    std::vector<geo::Triangle> mesh{
        {{Vec3{0, 0, 5}, Vec3{1, 0, 5}, Vec3{0, 1, 5}}},
        {{Vec3{-1, -1, 3}, Vec3{2, -1, 3}, Vec3{-1, 2, 3}}},
    };
    geo::Ray ray{Vec3{0.2, 0.2, 0}, Vec3{0, 0, 1}};
    if (auto hit = geo::pick(mesh, ray)) {
        std::cout << "hit triangle " << *hit << " with normal " << mesh[*hit].normal() << '\n';
    } else {
        std::cout << "no hit\n";
    }
    return 0;
}
